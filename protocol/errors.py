class ProtocolError(ValueError):
    pass
# TEMP until the full table lands
import enum
class ErrorCode(enum.IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    UNSUPPORTED_VERSION = 35

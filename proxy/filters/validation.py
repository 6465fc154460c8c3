"""Request validation (``proxy.request.validation``, on by default): every request the proxy has
a schema for is read the way Kafka's own request parsing reads it before a broker sees it, and
one Kafka would refuse closes its connection, as Kafka closes it. Some brokers die on requests
Kafka refuses (noida-db on a truncated compact array, tests/UPSTREAMS.md). What Kafka accepts
passes as the client's exact bytes: bytes after the last field, unknown tagged fields, and strings
that are not valid UTF-8 (docs/compatibility.md, *What the proxy accepts*). Versions the proxy has no schema
for are the broker's to judge. Record sets stay undecoded (zero-copy slices)."""

from __future__ import annotations

from proxy.chain import ALL_APIS, Answer, Filter, RequestContext


class RequestValidation(Filter):
    name = "request-validation"
    apis = ALL_APIS
    decodes = False  # checks the versions it has a schema for; relays the others

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        ctx.request.body  # noqa: B018 - decoding is the check: it raises ProtocolError; later filters reuse it
        return None

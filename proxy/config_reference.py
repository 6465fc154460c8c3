"""The configuration reference, ``docs/configuration.md``, generated from ``proxy/config_keys.py``.

    python -m proxy.config_reference > docs/configuration.md

``tests/unit/test_config_reference.py`` fails when the file differs from what this prints.
"""

from __future__ import annotations

from proxy.config_keys import GROUPS, Group
from tiering.cluster_configs import DYNAMIC_KEYS

COMMAND = "python -m proxy.config_reference > docs/configuration.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(group: Group) -> list[str]:
    lines = [f"## {group.title}", "",
             f"Read by {' and '.join(f'`{path}`' for path in group.read_by)}; explained in "
             f"[{group.doc.split('#')[0]}]({group.doc}).", "",
             "| key | default | description |", "|---|---|---|"]
    lines += [f"| `{key.name}` | {_cell(key.default)} | {'*(dynamic)* ' if key.name in DYNAMIC_KEYS else ''}"
              f"{_cell(key.description)} |" for key in group.keys]
    return lines + [""]


def reference() -> str:
    """The whole of ``docs/configuration.md``."""
    lines = ["# Configuration reference", "",
             "Every key the proxy reads, generated from `proxy/config_keys.py`; after changing that file, "
             f"regenerate this page with `{COMMAND}`.", "",
             "Keys go in a Kafka-style `.properties` file (`--config FILE`) or on the command line "
             "(`--set KEY=VALUE`); a key the proxy does not read is reported with the closest one it does.",
             "Keys marked *(dynamic)* also change while the proxy runs, cluster-wide, as Kafka's do: "
             "`kafka-configs.sh --entity-type brokers --entity-default --alter` through the proxy "
             "([Operating tiering](operating-tiering.md)).", ""]
    for group in GROUPS:
        lines += _table(group)
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference(), end="")

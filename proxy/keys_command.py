"""``tiered-proxy keys``: the key-encryption keys of the remote tier, for an operator.

- ``generate --key-id ID``: a new key-ring block on stdout, to append to the ring file;
- ``list``: the ring's keys, the active one, and how many segments and manifests each wraps;
- ``rewrap``: every data key re-wrapped under the active key (no segment rewritten; resumable;
  safe beside running proxies);
- ``remove --key-id ID``: the key taken out of the ring file, refused while anything needs it.

Every command but ``generate`` reads the proxy's own ``--config`` file (the remote tier and the
``remote.log.storage.encryption.*`` keys), with ``--set`` overrides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from proxy.config import load_properties, resolve_references
from tiering.service import DATA_DIR_CONFIG, DEFAULT_DATA_DIR
from tiering.storage.key_maintenance import KEYS_DIRECTORY, Walk, key_usage, rewrap
from tiering.storage.key_ring import (
    ACTIVE_KEY_ID_CONFIG,
    KEY_RING_FILE_CONFIG,
    PemKeyRing,
    key_block,
    remove_key_block,
)
from tiering.storage.object_layout import ObjectStorage
from tiering.storage.uri import storage_from_uri

_SHOWN = 10  # objects named in a refusal


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="the remote tier's key-encryption keys: generate, list, rewrap, remove")
    actions = keys.add_subparsers(dest="keys_command", required=True)
    generate = actions.add_parser("generate", help="print a new AES-256 key-ring block (append it to the ring file)")
    generate.add_argument("--key-id", required=True, help="the new key's id (letters, digits and . _ : -)")
    for name, text in (("list", "the ring's keys and how many segments and manifests each one wraps"),
                       ("rewrap", "re-wrap every data key under the active key "
                                  f"({ACTIVE_KEY_ID_CONFIG}); no segment is rewritten"),
                       ("remove", "take a key out of the ring file; refused while a segment or manifest needs it")):
        action = actions.add_parser(name, help=text)
        action.add_argument("--config", type=Path, required=True, metavar="FILE.properties",
                            help="the proxy's properties (remote.log.storage.uri, remote.log.storage.encryption.*)")
        action.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override one config key")
        if name == "remove":
            action.add_argument("--key-id", required=True, help="the key to remove")


def run(args: argparse.Namespace) -> int:
    if args.keys_command == "generate":
        sys.stdout.write(key_block(args.key_id))
        return 0
    props = resolve_references(load_properties(args.config))
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        props[key.strip()] = value.strip()
    uri = props.get("remote.log.storage.uri") or \
        f"file://{Path(props.get(DATA_DIR_CONFIG) or DEFAULT_DATA_DIR).resolve()}/remote"
    storage = storage_from_uri(uri, **props)
    try:
        if not isinstance(storage, ObjectStorage):
            raise ValueError(f"{uri}: not a store that keeps sealed objects")
        if storage.at_rest.keys is None:
            raise ValueError(f"no key ring configured: set {KEY_RING_FILE_CONFIG} and {ACTIVE_KEY_ID_CONFIG}")
        if args.keys_command == "list":
            return _list(storage)
        if args.keys_command == "rewrap":
            return _rewrap(storage)
        return _remove(storage, props, args.key_id)
    finally:
        storage.close()


def _progress(verb: str):  # type: ignore[no-untyped-def]
    def show(walk: Walk) -> None:
        print(f"{verb}: {walk.objects} envelopes and manifests seen, {walk.rewrapped} re-wrapped, "
              f"{walk.already} already done, {walk.gone} deleted meanwhile, {len(walk.failed)} failed",
              file=sys.stderr)
    return show


def _list(storage: ObjectStorage) -> int:
    keys = storage.at_rest.keys
    assert keys is not None
    walk = key_usage(storage, _progress("scanning"))
    for key_id in sorted(set(keys.key_ids()) | set(walk.uses)):
        objects = walk.uses.get(key_id, [])
        segments = sum(1 for o in objects if o.endswith(".seal"))
        state = "active" if key_id == keys.active_key_id else "in ring" if key_id in keys.key_ids() else "MISSING"
        print(f"{key_id}\t{state}\t{segments} segments\t{len(objects) - segments} manifests")
    for failure in walk.failed:
        print(f"unreadable: {failure}", file=sys.stderr)
    return 1 if walk.failed or any(k not in keys.key_ids() for k in walk.uses) else 0


def _rewrap(storage: ObjectStorage) -> int:
    walk = rewrap(storage, _progress("rewrap"))
    for failure in walk.failed[:_SHOWN]:
        print(f"not re-wrapped: {failure}", file=sys.stderr)
    if walk.failed:
        print(f"{len(walk.failed)} objects could not be re-wrapped; run the command again once their keys "
              "are in the ring", file=sys.stderr)
        return 1
    print(f"every data key is under {storage.at_rest.keys.active_key_id}"  # type: ignore[union-attr]
          f" ({walk.rewrapped} re-wrapped now)")
    return 0


def _remove(storage: ObjectStorage, props: dict[str, str], key_id: str) -> int:
    keys = storage.at_rest.keys
    if not isinstance(keys, PemKeyRing):
        raise ValueError(f"{KEY_RING_FILE_CONFIG} is not set: keys held by a KMS are removed there")
    if key_id == keys.active_key_id:
        raise ValueError(f"{key_id} is the active key ({ACTIVE_KEY_ID_CONFIG}): make another key active, "
                         "run `tiered-proxy keys rewrap`, then remove it")
    if key_id not in keys.key_ids():
        raise ValueError(f"{keys.path} holds no key {key_id}")
    walk = key_usage(storage, _progress("scanning"))
    needed = walk.uses.get(key_id, [])
    if needed or walk.failed:
        for item in needed[:_SHOWN]:
            print(f"needs {key_id}: {storage.key(item)}", file=sys.stderr)
        for failure in walk.failed[:_SHOWN]:
            print(f"unreadable: {failure}", file=sys.stderr)
        more = f" (and {len(needed) - _SHOWN} more)" if len(needed) > _SHOWN else ""
        reason = (f"{len(needed)} segments and manifests still need it{more}; run `tiered-proxy keys rewrap` first"
                  if needed else f"{len(walk.failed)} objects could not be read, so the key may still be needed")
        print(f"tiered-proxy: refusing to remove {key_id}: {reason}", file=sys.stderr)
        return 1
    remove_key_block(keys.path, key_id)
    storage.delete_object(f"{KEYS_DIRECTORY}/{key_id}.check")
    print(f"removed {key_id} from {keys.path}; nothing in {props.get('remote.log.storage.uri') or 'the remote tier'} "
          "needed it")
    return 0

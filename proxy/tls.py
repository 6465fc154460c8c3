"""TLS on the client side of the proxy, configured with Kafka's broker keys:

    listeners=SSL://0.0.0.0:9093
    ssl.keystore.type=PEM
    ssl.keystore.location=/etc/tiered-proxy/proxy.pem   # private key and certificate chain
    ssl.key.password=...                                 # if the key is encrypted
    ssl.client.auth=none|requested|required              # client certificates (mutual TLS)
    ssl.truststore.location=/etc/tiered-proxy/ca.pem     # CAs that sign client certificates

Every listener (bootstrap and per-broker ports) speaks TLS when ``listeners`` says ``SSL://``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

from proxy.config import ConfigError


def server_context(props: Mapping[str, str]) -> ssl.SSLContext:
    store_type = props.get("ssl.keystore.type", "PEM").upper()
    if store_type != "PEM":
        raise ConfigError(f"ssl.keystore.type={store_type}: only PEM key stores are supported")
    keystore = props.get("ssl.keystore.location")
    if not keystore:
        raise ConfigError("listeners use SSL:// but ssl.keystore.location (a PEM file with key and certificates) is not set")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(keystore, password=props.get("ssl.key.password") or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"ssl.keystore.location={keystore}: {e}") from None
    auth = props.get("ssl.client.auth", "none").lower()
    if auth not in ("none", "requested", "required"):
        raise ConfigError(f"ssl.client.auth must be none, requested or required, not {auth!r}")
    if auth != "none":
        truststore = props.get("ssl.truststore.location")
        if not truststore:
            raise ConfigError(f"ssl.client.auth={auth} needs ssl.truststore.location (PEM CA certificates)")
        try:
            context.load_verify_locations(truststore)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"ssl.truststore.location={truststore}: {e}") from None
        context.verify_mode = ssl.CERT_REQUIRED if auth == "required" else ssl.CERT_OPTIONAL
    return context

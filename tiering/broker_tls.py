"""TLS from the proxy to the brokers, shared by the proxy's connections (client traffic) and the
tiering clients (copier, metadata topic, consumer group). Keys (Kafka's client names, prefixed
``upstream.``):

    upstream.security.protocol=SSL                          # PLAINTEXT (default) or SSL
    upstream.ssl.truststore.location=/etc/tiered-proxy/cluster-ca.pem
    upstream.ssl.keystore.location=/etc/tiered-proxy/proxy-client.pem   # key + chain, for mutual TLS
    upstream.ssl.key.password=...
    upstream.ssl.endpoint.identification.algorithm=https    # "" turns host name checks off
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping


def upstream_ssl_context(props: Mapping[str, object]) -> ssl.SSLContext | None:
    protocol = str(props.get("upstream.security.protocol") or "PLAINTEXT").upper()
    if protocol == "PLAINTEXT":
        return None
    if protocol != "SSL":
        raise ValueError(f"upstream.security.protocol={protocol}: PLAINTEXT or SSL (SASL is the clients' own, "
                         "passed through)")
    truststore = props.get("upstream.ssl.truststore.location")
    context = ssl.create_default_context(cafile=str(truststore) if truststore else None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    keystore = props.get("upstream.ssl.keystore.location")
    if keystore:
        context.load_cert_chain(str(keystore), password=str(props.get("upstream.ssl.key.password") or "") or None)
    if str(props.get("upstream.ssl.endpoint.identification.algorithm", "https")).lower() != "https":
        context.check_hostname = False
    return context

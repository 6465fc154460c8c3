"""Request validation: every request is parsed against Kafka's schema before a broker sees it
(``proxy.request.validation``, on by default). Some brokers die on a malformed request (noida-db
on a truncated compact array, tests/UPSTREAMS.md); a request that does not parse closes only its
own connection, with one log line. Record sets stay undecoded (zero-copy slices)."""

from __future__ import annotations

from proxy.chain import ALL_APIS, Answer, Filter, RequestContext


class RequestValidation(Filter):
    name = "request-validation"
    apis = ALL_APIS

    async def on_request(self, ctx: RequestContext) -> Answer | None:
        ctx.request.body  # noqa: B018 - decoding is the check: it raises ProtocolError; later filters reuse it
        return None

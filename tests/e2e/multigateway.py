"""Gateways over one shared PostgreSQL catalog, for the multi-gateway suites
(`test_multigateway.py`, `test_multigateway_faults.py`)."""

from __future__ import annotations

from botocore.exceptions import ClientError

from harness import DEFAULT_TENANTS, Backend, Gateway, Tenant


def start_gateways(url: str, backend: Backend, tmp_path_factory, n: int = 3,
                   tenants: list[Tenant] | None = None, name: str = "mgw") -> list[Gateway]:
    """`n` gateways, each its own data_dir and port, over the catalog at `url`; on a failure
    to start, the ones already started are stopped."""
    gws: list[Gateway] = []
    try:
        for i in range(n):
            gw = Gateway(
                tmp_path_factory.mktemp(f"{name}-{i}"),
                backend,
                tenants=list(tenants or DEFAULT_TENANTS),
                extra=f'[catalog]\nurl = "{url}"\n',
            )
            gws.append(gw.start())
    except BaseException:
        for gw in gws:
            gw.stop()
        raise
    return gws


def error(e: ClientError) -> tuple[str, int]:
    return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]

"""The shape of the host facts a report carries (`host`, from collector/gather.py), checked at
ingest so that what is stored is what the pages can read. NVML facts are checked by their
reader, topoweb.core.formats.nvml.read_nvml.

Known keys must have their documented types (null where the collector found nothing); keys
not named here are kept as they are (a newer collector may send more). `check_host` raises
FactsError naming the path of the first wrong value, e.g. `rdma_nics[0].numa_node`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


class FactsError(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


Check = Callable[[Any, str], None]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _or_null(kind: str, test: Callable[[Any], bool]) -> Check:
    """A value of `kind` or null (host facts: the collector writes null where it found none)."""

    def check(value: Any, path: str) -> None:
        if value is not None and not test(value):
            raise FactsError(path, f"expected {kind} or null, got {_shown(value)}")

    return check


def _text(value: Any, path: str) -> None:
    if value is not None and not isinstance(value, str):
        raise FactsError(path, f"expected a string or null, got {_shown(value)}")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _object(fields: Mapping[str, Check], unknown_ok: bool = False) -> Check:
    """An object whose named keys (all optional) have the given shapes; with `unknown_ok`, a
    string ("unsupported") or null stands for the whole object."""

    def check(value: Any, path: str) -> None:
        if unknown_ok and (value is None or isinstance(value, str)):
            return
        if not isinstance(value, dict):
            raise FactsError(path, f"expected an object, got {_shown(value)}")
        for key, field in fields.items():
            if key in value:
                field(value[key], f"{path}.{key}" if path else key)

    return check


def _list(item: Check, unknown_ok: bool = False) -> Check:
    def check(value: Any, path: str) -> None:
        if unknown_ok and (value is None or isinstance(value, str)):
            return
        if not isinstance(value, list):
            raise FactsError(path, f"expected a list, got {_shown(value)}")
        for i, entry in enumerate(value):
            item(entry, f"{path}[{i}]")

    return check


_RDMA_NIC = _object(
    {
        "device": _text,
        "rate": _text,
        "rate_gbps": _or_null(
            "a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)
        ),
        "state": _text,
        "link_layer": _text,
        "pci_bus_id": _text,
        "numa_node": _or_null("an integer", _is_int),
        "node_guid": _text,
    }
)
_HOST = _object(
    {
        "product_name": _text,
        "sys_vendor": _text,
        "cpu_model": _text,
        "kernel": _text,
        "rdma_nics": _list(_RDMA_NIC, unknown_ok=True),
        "topo_p2p": _object({"read": _text}, unknown_ok=True),
    }
)


def check_host(value: Any) -> None:
    """Host facts as collector/gather.py sends them (DMI names, CPU, kernel, RDMA NICs)."""
    _HOST(value, "")

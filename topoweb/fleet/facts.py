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


# Past these, host facts are forged or corrupt: a host has far fewer RDMA devices, and names
# and versions are short.
MAX_RDMA_NICS = 1024
MAX_TEXT = 1024
MAX_CAPTURE = 256 * 1024  # a captured command's output (topo -p2p)


def _text(value: Any, path: str, limit: int = MAX_TEXT) -> None:
    if value is not None and not isinstance(value, str):
        raise FactsError(path, f"expected a string or null, got {_shown(value)}")
    if value is not None and len(value) > limit:
        raise FactsError(path, f"{len(value)} characters; at most {limit} are accepted")


def _capture(value: Any, path: str) -> None:
    _text(value, path, MAX_CAPTURE)


def _number_in(kind: str, low: float, high: float, integer: bool = False) -> Check:
    def test(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if integer and not isinstance(value, int):
            return False
        return low <= value <= high

    return _or_null(f"{kind} from {low:g} to {high:g}", test)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _object(fields: Mapping[str, Check], unknown_ok: bool = False) -> Check:
    """An object whose named keys (all optional) have the given shapes; with `unknown_ok`, a
    string ("unsupported") or null stands for the whole object."""

    def check(value: Any, path: str) -> None:
        if unknown_ok and (value is None or isinstance(value, str)):
            _text(value, path)
            return
        if not isinstance(value, dict):
            raise FactsError(path, f"expected an object, got {_shown(value)}")
        for key, field in fields.items():
            if key in value:
                field(value[key], f"{path}.{key}" if path else key)

    return check


def _list(item: Check, unknown_ok: bool = False, limit: int = MAX_RDMA_NICS) -> Check:
    def check(value: Any, path: str) -> None:
        if unknown_ok and (value is None or isinstance(value, str)):
            _text(value, path)
            return
        if not isinstance(value, list):
            raise FactsError(path, f"expected a list, got {_shown(value)}")
        if len(value) > limit:
            raise FactsError(path, f"{len(value)} entries; at most {limit} are accepted")
        for i, entry in enumerate(value):
            item(entry, f"{path}[{i}]")

    return check


_RDMA_NIC = _object(
    {
        "device": _text,
        "rate": _text,
        "rate_gbps": _number_in("a number", 0, 100_000),
        "state": _text,
        "link_layer": _text,
        "pci_bus_id": _text,
        "numa_node": _number_in("an integer", -1, 1023, integer=True),  # -1: sysfs's "none"
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
        "topo_p2p": _object({"read": _capture}, unknown_ok=True),
    }
)


def check_host(value: Any) -> None:
    """Host facts as collector/gather.py sends them (DMI names, CPU, kernel, RDMA NICs)."""
    _HOST(value, "")

"""Real measurements on one GPU, printed as JSON (needs torch with CUDA; run it on a GPU host,
not here): host<->device copy rates (pinned and pageable), small-copy latency, device-to-device
copies, bf16 GEMM throughput at transformer shapes. Produced
tests/fixtures/device_01_h200-1gpu-firecracker-vm-torch-copy-gemm.json."""

import json
from collections.abc import Callable

import torch

SIZES = [4, 1024, 8192, 65536, 1 << 20, 8 << 20, 64 << 20, 256 << 20, 1 << 30]
GEMM_SHAPES = [
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (16384, 12288, 4096),
    (16384, 4096, 11008),
    (8192, 28672, 8192),
    (4096, 4096, 4096),
    (2048, 2048, 2048),
]


def mean_us(fn: Callable[[], object], iters: int) -> float:
    """Mean time of one call in microseconds, by CUDA events, after one warm-up call."""
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters * 1e3


def copies(dev: torch.device) -> list[dict[str, float | int | str]]:
    rows: list[dict[str, float | int | str]] = []
    for size in SIZES:
        iters = 50 if size <= (8 << 20) else 10
        d = torch.empty(size, dtype=torch.uint8, device=dev)
        d2 = torch.empty(size, dtype=torch.uint8, device=dev)
        pinned = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        pageable = torch.empty(size, dtype=torch.uint8)
        kinds: list[tuple[str, Callable[[], object]]] = [
            ("h2d_pinned", lambda d=d, h=pinned: d.copy_(h, non_blocking=True)),
            ("d2h_pinned", lambda d=d, h=pinned: h.copy_(d, non_blocking=True)),
            ("h2d_pageable", lambda d=d, h=pageable: d.copy_(h)),
            ("d2h_pageable", lambda d=d, h=pageable: h.copy_(d)),
            ("d2d", lambda d=d, d2=d2: d2.copy_(d)),
        ]
        for kind, fn in kinds:
            us = mean_us(fn, iters)
            rows.append(
                {
                    "kind": kind,
                    "bytes": size,
                    "time_us": round(us, 3),
                    "gbps": round(size / us / 1e3, 3),
                }
            )
    return rows


def gemms(dev: torch.device) -> list[dict[str, float | int]]:
    rows: list[dict[str, float | int]] = []
    for m, n, k in GEMM_SHAPES:
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        us = mean_us(lambda a=a, b=b: a @ b, 20)
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "time_us": round(us, 2),
                "tflops": round(2 * m * n * k / us / 1e6, 1),
            }
        )
    return rows


def main() -> None:
    dev = torch.device("cuda:0")
    props = torch.cuda.get_device_properties(0)
    print(
        json.dumps(
            {
                "device": props.name,
                "total_memory_bytes": props.total_memory,
                "sm_count": props.multi_processor_count,
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "copies": copies(dev),
                "gemm": gemms(dev),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()

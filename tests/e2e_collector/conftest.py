"""The collector against the real service: the web suite's service check and the collector
suite's fakes of what a GPU host has (nvidia-smi on PATH, NVML), in one place."""

from tests.collector.conftest import fake_nvidia_smi, fake_nvml
from tests.web.conftest import real_services

__all__ = ["fake_nvidia_smi", "fake_nvml", "real_services"]

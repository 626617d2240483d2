"""The topoweb collector agent: gathers GPU topology on a host and uploads it.

Stdlib + nvidia-ml-py only: it must install alone on a GPU host.
"""

__version__ = "0.1.0"

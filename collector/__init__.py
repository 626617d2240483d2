"""The topoweb collector agent: gathers GPU topology on a host and uploads it. Stdlib + nvidia-ml-py only."""

__version__ = "0.1.0"

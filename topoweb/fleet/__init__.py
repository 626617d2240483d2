"""The fleet: servers, their topology snapshots and benchmark results, and who may write them."""

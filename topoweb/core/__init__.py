"""Pure-Python domain core of topoweb: parsers, model, cost model and placement. Never imports Django."""

"""Pure-Python domain core of topoweb: parsers, model, costs and placement. No Django here."""

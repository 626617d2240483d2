"""The JSON API endpoints that compose several apps (a server with its health badge and its
class's analysis, reports whose ingest asks for both): the one layer above them all but ui.
An app's own endpoints that read only it and the rooms below stay in its apis.py."""

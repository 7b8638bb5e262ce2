"""The web console under ``/ui``, served by ``noetl server`` beside the HTTP API (same port, same
token); docs/console.md describes its pages and why it is rendered on the server. The routes are
in ``pages``; ``noetl.server.api.app`` adds them when it builds the application."""

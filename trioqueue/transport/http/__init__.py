"""The HTTP port: one listener for WebSocket, the REST API, SSE, the health probes and
the dashboard's files."""

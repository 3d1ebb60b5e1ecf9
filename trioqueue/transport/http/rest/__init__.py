"""The REST API: its routes, what a route is, and how one reads its request."""

"""Webhooks: who wants which job events (:mod:`.registry`, the router's) and which URLs
and addresses a delivery may reach (:mod:`.urls`, the SSRF guard both adding a webhook
and each delivery ask)."""

"""The links between the brokers of a cluster: forwarded commands and relayed events,
spoken in the wire's frames and codec."""

"""The TCP transport: the listener, each connection's reading and sending, its send
queue of framed replies and the socket calls that skip a copy."""

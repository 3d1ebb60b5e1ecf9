"""Large frames and long replies: decoded, measured and encoded a slice at a time, so
that one client's megabytes never hold the event loop for the others."""

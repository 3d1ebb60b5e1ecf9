"""The wire: frames, the codecs and the data model they accept, request ids, the names
of live events and the table of commands, the same on every transport."""

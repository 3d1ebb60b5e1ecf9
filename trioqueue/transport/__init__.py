"""The transport: ``wire/`` (frames, codecs, the command table), ``tcp/`` and ``http/``
(the listeners and their connections), ``large/`` (large frames and long replies, a
slice at a time); here, what every connection shares (the session, the shell of limits,
the doors, the listeners' context)."""

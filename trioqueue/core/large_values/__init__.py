"""Large values without holding the event loop: work on a value of many small values
(making, encoding, decoding, freeing it) cut in slices (:mod:`.slicing`), sized by the
values it holds, looked at no further than a limit (:mod:`.value_count`); JSON made a
run at a time (:mod:`.json_slices`), msgpack decoded a run at a time
(:mod:`.msgpack_runs`), values let go of taken apart in slices (:mod:`.graveyard`), and
the young generation collected at the end of a slice (:mod:`.young_collections`)."""

"""Jobs that come back: cron schedules (:mod:`.crons`), the cron expressions and time
zones both they and a job's ``repeat`` option are read with (:mod:`.expressions`), and
that option's rules (:mod:`.job_option`), kept together so the two ways of repeating a
job read one expression language."""

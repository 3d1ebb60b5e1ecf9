"""The PostgreSQL store: its tables and statements, connections, owner lock and migrations."""

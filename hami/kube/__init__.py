"""The only code that talks to the API server: client, informers, node lock, events, leadership."""

"""Test doubles shared by the fast tier: an in-memory API server (kubeapi)."""

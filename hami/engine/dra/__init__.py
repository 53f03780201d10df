"""DRA: HAMi's requests as ResourceClaims, and DRA devices as cards (docs/dra.md)."""

"""DRA: HAMi's requests written as ResourceClaims (the webhook's DRA mode and the placer), and
the devices DRA drivers publish read into the engine's card model with what allocated claims take
of them, so that one card is counted once in both worlds (docs/dra.md)."""

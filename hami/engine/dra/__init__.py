"""Devices a DRA driver publishes (ResourceSlices) and what allocated ResourceClaims take of
them, read into the engine's card model so that one card is counted once in both worlds."""

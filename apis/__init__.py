"""The shared vocabulary of koordlet and koord-sched: Koordinator's wire names, their typed decoders and encoders."""

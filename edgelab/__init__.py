"""edgelab: re-run edge-device distributed-training papers on emulated Raspberry Pi clusters."""

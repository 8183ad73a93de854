"""`make bench-weights`: the default model's weights kept quantized against widened at load."""

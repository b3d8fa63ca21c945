"""What makes generation fast on this machine, without changing what it computes beyond
what the machine decides: threads, weight forms, quantization, the forward cache, the KV
caches and the random draws."""

"""What every benchmark shares, one module a concept: the stack launchers (stack: the compose
services as processes; supervised: `make run`'s supervisor), process figures (procs), machine
facts and the host line (machine), the CPU meter (cpu), free ports (ports), targets and their
verdict table (targets), markdown cells and tables (tables), and llama.cpp for the peer runners
(llamacpp). Tests may import these; benchmarks never import tests."""

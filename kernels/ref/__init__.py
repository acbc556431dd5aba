"""Plain-torch reference kernels: the ground truth for the tests and the CPU path."""

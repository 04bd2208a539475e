"""Values and small utilities every layer uses: operations and measurements, descriptors and costs,
shape folding, settings, errors, processes."""

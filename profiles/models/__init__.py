"""Model profiles: what a model costs per layer, its file formats, the TorchGraph importer and the zoo."""

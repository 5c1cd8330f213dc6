"""Hardware: the device and link catalog, clusters of servers, their topology and routes."""

"""A real kube-apiserver for end-to-end tests: the Go module that builds it, and its fixture."""

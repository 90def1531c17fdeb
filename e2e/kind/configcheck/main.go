// Command configcheck reads a kind cluster configuration the way `kind create cluster`
// does before it needs a container engine: strict YAML decoding into kind's public
// v1alpha4 types (an unknown or misspelled field is an error), then kind's defaults. It
// adds the checks of kind's own validation that the e2e config relies on (known roles,
// a control plane) and prints the defaulted configuration as JSON, for the tests that
// run where there is no Docker (e2e/test_helm_kind.py).
//
//	go run ./configcheck cluster.yaml
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	yaml "go.yaml.in/yaml/v3"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: configcheck CONFIG.yaml")
		os.Exit(2)
	}
	cfg, err := load(os.Args[1])
	if err != nil {
		fmt.Fprintf(os.Stderr, "configcheck: %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")
	if err := out.Encode(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func load(path string) (*v1alpha4.Cluster, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var meta struct {
		Kind       string `yaml:"kind"`
		APIVersion string `yaml:"apiVersion"`
	}
	if err := yaml.Unmarshal(raw, &meta); err != nil {
		return nil, err
	}
	if meta.APIVersion != "kind.x-k8s.io/v1alpha4" || meta.Kind != "Cluster" {
		return nil, fmt.Errorf("want kind.x-k8s.io/v1alpha4 Cluster, got %s %s", meta.APIVersion, meta.Kind)
	}
	cfg := &v1alpha4.Cluster{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	v1alpha4.SetDefaultsCluster(cfg)
	planes := 0
	for i, node := range cfg.Nodes {
		switch node.Role {
		case v1alpha4.ControlPlaneRole:
			planes++
		case v1alpha4.WorkerRole:
		default:
			return nil, fmt.Errorf("node %d: unknown role %q", i, node.Role)
		}
	}
	if planes == 0 {
		return nil, fmt.Errorf("no control-plane node")
	}
	return cfg, nil
}

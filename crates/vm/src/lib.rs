//! KubeVirt's VM network control plane as pure decisions: API subset, defaults, validation, names, annotations, status, migration

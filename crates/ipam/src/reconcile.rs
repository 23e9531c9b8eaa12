//! Reconciler decisions (next step).

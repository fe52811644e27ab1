//! Subagents: declarations (code and workspace files), inheritance of hooks, bounds on
//! tools and depth, hardening against a model that misuses delegation, workspaces and
//! their policies, small models, and properties over random delegation trees.

mod declarations;
mod hardening;
mod properties;
mod small_models;
mod tool_per_subagent;
mod workspaces;

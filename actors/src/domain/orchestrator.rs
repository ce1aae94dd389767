//! The orchestrator memory's domain (orchestrator_memory_subsystem.md, issue 23): typed
//! memory nodes with their provenance, typed edges between them, what one write holds, what
//! a dropped file holds, and the `[memory]` settings. The second memory system of the contract, beside the butlers':
//! its own vocabulary (the spec's, `Goal`, `Todo`, `Contradicts`), on the same engine.

pub mod bulletin;
pub mod edge;
pub mod extract;
pub mod graph_query;
pub mod graph_write;
pub mod ingest_file;
pub mod node;
pub mod recall;
pub mod settings;
pub mod source;
pub mod status;

//! A small orchestrator scenario (the billing export): one goal with a todo part of it, a
//! decision, preferences two of which contradict each other, a fact. The bulletin tests and
//! the bulletin bench's printed example are made from it.

use serde_json::{Value, json};

/// `orchestrator_remember`'s arguments for the scenario, as one workflow step's output.
pub fn billing_export() -> Value {
    json!({
        "source": {"sourceType": "workflow_output", "workflowRunId": "run-1", "capturedBy": "extractor"},
        "memories": [
            {"ref": "goal", "type": "Goal", "content": "Ship the billing export by Friday", "importance": 90},
            {"ref": "csv", "type": "Todo", "content": "Write the CSV writer for the billing export"},
            {"type": "Decision", "content": "Billing exports are CSV, not XLSX"},
            {"type": "Preference", "content": "The finance team reads reports as PDF"},
            {"type": "Fact", "content": "The billing database is replicated to Dublin"},
            {"ref": "mon", "type": "Preference", "content": "Send the billing summary on Monday"},
            {"ref": "fri", "type": "Preference", "content": "Send the billing summary on Friday"},
        ],
        "edges": [
            {"from": "csv", "to": "goal", "edgeType": "PartOf"},
            {"from": "fri", "to": "mon", "edgeType": "Contradicts"},
        ],
    })
}

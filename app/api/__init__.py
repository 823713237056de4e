"""HTTP functions: parse → call a service → shape the response."""

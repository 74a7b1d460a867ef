"""A repo of two apps, `ar` and `payroll`, each with a workflow `chase` and a collection `notes`,
beside a root workflow `hello` and the company's one connector, `notify`."""

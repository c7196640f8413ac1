"""Small pipeline files the CLI tests write into a temporary folder."""

CHAIN = """version: 1
kind: graph
id: chain
input: go
nodes:
  - {id: s1, function: 'tests.support:slow_step'}
  - {id: s2, function: 'tests.support:slow_step'}
  - {id: s3, function: 'tests.support:slow_step'}
  - {id: s4, function: 'tests.support:slow_step'}
  - {id: s5, function: 'tests.support:slow_step'}
  - {id: s6, function: 'tests.support:slow_step'}
edges:
  - {from: s1, to: s2}
  - {from: s2, to: s3}
  - {from: s3, to: s4}
  - {from: s4, to: s5}
  - {from: s5, to: s6}
"""

FAILING = """version: 1
kind: graph
id: failing
input: go
nodes:
  - {id: first, function: 'tests.support:spec_source'}
  - {id: gate, function: 'tests.support:fail_unless_allowed'}
edges:
  - {from: first, to: gate}
"""

HUMAN = """version: 1
kind: graph
id: human
input: go
nodes:
  - {id: ask, function: 'tests.support:ask_human'}
"""

AGENT = """version: 1
kind: agent
id: helper
agents:
  - name: helper
    model: {provider: scripted, replies: [hello from the agent]}
"""

PAYER = """version: 1
kind: agent
id: payer
agents:
  - name: payer
    tools: ['tests.support:approve_payment']
    model:
      provider: scripted
      follow_history: true
      replies:
        - {tool: approve_payment, input: {amount: 5}}
        - Payment handled.
"""

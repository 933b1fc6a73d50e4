-- Assigning a global (a forgotten 'local').
-- expect-at: 4
-- expect: assignment to undeclared global 'steps' | local steps
steps = 100
return run { model = "tiny-cola", train = { steps = steps } }

"""PyTorch bugs the exporter works around while it compiles, each only where the installed
PyTorch has it (a probe decides, not a version number), each named in the export's notes.

A fix here changes no numerics: it makes what Inductor compiles agree with eager where the
released PyTorch does not, as the upstream fix does in later releases.

* **The LSTM decomposition's final states** (fixed upstream in pytorch/pytorch#185716, first
  in the 2.13 line): `aten.lstm.input`'s decomposition, which Inductor runs for every device
  but the CPU (the CPU takes `mkldnn_rnn_layer`), returns `h_n` and `c_n` as
  `(layers * directions, 1, batch, hidden)` instead of `(layers * directions, batch, hidden)`
  whenever the batch is not 1: `one_layer_lstm` squeezes dimension 1 of a state it gave an
  extra dimension 0. The compiled program then returns other shapes than eager, and the
  export refuses it. The fix squeezes the dimension the decomposition added.
"""

import contextlib

LSTM_NOTE = ("applied PyTorch's fix for the LSTM decomposition's final-state shapes "
             "(pytorch/pytorch#185716): this PyTorch returns h_n and c_n with an extra dimension")


def lstm_states_have_extra_dim(torch):
    """Whether this PyTorch's `one_layer_lstm` returns 3-d states for a batch of 2."""
    try:
        from torch._decomp import decompositions as D
    except ImportError:
        return False
    one_layer = getattr(D, "one_layer_lstm", None)
    if one_layer is None:
        return False
    seq, batch, feature, hidden = 3, 2, 4, 5
    inp = torch.zeros(seq, batch, feature)
    states = (torch.zeros(batch, hidden), torch.zeros(batch, hidden))
    params = [torch.zeros(4 * hidden, feature), torch.zeros(4 * hidden, hidden)]
    try:
        with torch.no_grad():
            _, (h, _) = one_layer(inp, states, params, False)
    except Exception:
        return False
    return h.dim() == 3


@contextlib.contextmanager
def applied(torch, notes):
    """While active, the probed fixes are in place; each one applied adds its note to `notes`."""
    restore = []
    try:
        if lstm_states_have_extra_dim(torch):
            from torch._decomp import decompositions as D
            original = D.one_layer_lstm

            def one_layer_lstm(*args, **kwargs):
                out, (h, c) = original(*args, **kwargs)
                # The decomposition's own `hidden[k].unsqueeze(0)` is the extra dimension.
                if h.dim() == 3 and h.size(0) == 1:
                    h, c = h.squeeze(0), c.squeeze(0)
                return out, (h, c)

            D.one_layer_lstm = one_layer_lstm
            restore.append(lambda: setattr(D, "one_layer_lstm", original))
            notes.append(LSTM_NOTE)
        yield
    finally:
        for undo in reversed(restore):
            undo()

"""The smallest DGX H100 cluster that trains Llama-3-70B on 15T tokens in 90 days for under $50M.

    python examples/plan_llama3_70b_15t.py [pareto.png]

st.plan searches node counts (any count, not only powers of two) × tp × pp × dp × micro-batch ×
interleaving × SP × ZeRO × recompute, keeps what fits, meets the deadline and the budget, and ranks by
cost; df.attrs["pareto"] is the time / cost / energy front, df.attrs["candidates"] everything that qualifies.
"""

import sys

import simtrain as st

plan = st.plan("llama3-70b", "dgx-h100", tokens=15e12, deadline_s=90 * 86400, budget_usd=50e6,
               global_batch_size=2048, seq_len=8192, objective="cost", top=5)
if plan.empty:
    sys.exit(plan.attrs["explanation"])
every = plan.attrs["candidates"]
smallest = every.sort_values(["devices", "cost_usd"]).iloc[0]
print(f"{plan.attrs['layouts_searched']:,} layouts searched over {len(plan.attrs['nodes_searched'])} node counts; "
      f"{len(every):,} meet 90 days and $50M")
print(f"smallest cluster: {int(smallest.devices)} H100s ({int(smallest.devices) // 8} nodes), "
      f"{smallest.time_to_train_days:.0f} days, ${smallest.cost_usd / 1e6:.1f}M")
cols = ["devices", "tp", "pp", "dp", "micro_batch_size", "virtual_stages", "zero_stage", "recompute",
        "time_to_train_days", "cost_usd", "energy_kwh", "why"]
print(plan[cols].to_string(index=False, float_format="%.1f"))
print("Pareto front (time, cost, energy):")
print(plan.attrs["pareto"][["devices", "tp", "pp", "dp", "time_to_train_days", "cost_usd", "energy_kwh"]]
      .to_string(index=False, float_format="%.1f"))
if len(sys.argv) > 1:
    from simtrain.report.plot_plan import plot_plan
    plot_plan(plan, sys.argv[1], title="Llama-3-70B, 15T tokens on DGX H100: time vs cost")

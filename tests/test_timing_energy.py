"""Energy per inference from board.toml [power] (codegen/timing/energy.py): the datasheet figures,
the energy formula, its bounds, idle time, TX power and the errors for boards without figures."""

from __future__ import annotations

import tomllib

import pytest

from codegen.boards import Board, load_board
from codegen.errors import UserError
from codegen.timing.energy import Bounds, load_power, node_energy

pytestmark = pytest.mark.unit


def test_nrf52840_figures_are_ordered_and_sourced():
    p = load_power("nrf52840dk")
    assert p.voltage_v == 3.0 and p.regulator == "ldo" and p.tx_power_dbm == 8  # board.toml [radio] txpower_dbm
    d = load_power("nrf52840dk", regulator="dcdc")
    for facts in (p, d):
        assert set(facts.radio_tx_ma) == {0, 8} and set(facts.radio_rx_ma) == {"1M", "2M"}
        assert facts.tx_ma(8).low > facts.tx_ma(0).high
        assert facts.rx_ma("2M").low >= facts.rx_ma("1M").low
        assert all(facts.sources[k] for k in facts.sources)
    # read from the datasheet (typical values): no spread
    assert d.tx_ma(8) == Bounds(16.40, 16.40, 16.40) and d.rx_ma("1M") == Bounds(6.26, 6.26, 6.26)
    # DC/DC cuts CPU and radio current against the LDO
    for get in (lambda f: f.cpu_active_ma, lambda f: f.tx_ma(0), lambda f: f.tx_ma(8), lambda f: f.rx_ma("1M")):
        assert get(d).central < get(p).central


def test_qemu_m4_models_an_nrf52840_with_the_same_figures():
    nrf = tomllib.loads((load_board("nrf52840dk").path / "board.toml").read_text())["power"]
    qemu = tomllib.loads((load_board("qemu-m4").path / "board.toml").read_text())["power"]
    assert nrf == qemu


def test_energy_is_the_sum_of_current_times_time():
    p = load_power("nrf52840dk")
    e = node_energy(p, 640_000, 64e6, 2_000, 8_000, 50_000, comm_us=20_000, phy="2M")
    v = 3.0
    cpu = p.cpu_active_ma.central
    expected = v * (cpu * 10_000 + cpu * 20_000 + p.tx_ma(8).central * 2_000 + p.rx_ma("2M").central * 8_000) / 1000 \
        + v * p.idle_ua.central * 20_000 / 1e6
    assert e.t_cpu_us.central == pytest.approx(10_000)
    assert e.t_idle_us.central == pytest.approx(20_000)
    assert e.total_uj.central == pytest.approx(expected)
    assert e.total_uj.low <= e.total_uj.central <= e.total_uj.high
    assert e.radio_uj.central == pytest.approx(e.tx_uj.central + e.rx_uj.central)


def test_energy_increases_with_tx_power_and_cycles():
    for reg in ("ldo", "dcdc"):
        p = load_power("nrf52840dk", regulator=reg)
        lo = node_energy(p, 1e6, 64e6, 5_000, 20_000, 1e5, tx_power_dbm=0)
        hi = node_energy(p, 1e6, 64e6, 5_000, 20_000, 1e5, tx_power_dbm=8)
        assert hi.tx_uj.low > lo.tx_uj.high and hi.total_uj.central > lo.total_uj.central
        more = node_energy(p, 2e6, 64e6, 5_000, 20_000, 1e5, tx_power_dbm=8)
        assert more.total_uj.central > hi.total_uj.central
        assert node_energy(p, 1e6, 64e6, 5_000, 20_000, 1e5, tx_power_dbm=8).total_uj == hi.total_uj  # deterministic


def test_bounds_follow_the_inputs_and_idle_never_goes_negative():
    p = load_power("nrf52840dk")
    e = node_energy(p, (0.8e6, 1e6, 1.5e6), 64e6, 1_000, (3_000, 4_000, 4_000), 1e5)
    assert e.t_cpu_us == Bounds(12_500, 15_625, 23_437.5)
    assert e.total_uj.low < e.total_uj.central < e.total_uj.high
    busy = node_energy(p, 64e6, 64e6, 1_000, 1_000, period_us=10_000)  # 1 s of compute in a 10 ms period
    assert busy.t_idle_us == Bounds(0, 0, 0) and busy.idle_uj == Bounds(0, 0, 0)


def test_a_sleeping_cpu_during_rounds_costs_less_than_polling():
    p = load_power("nrf52840dk")
    run = node_energy(p, 1e6, 64e6, 2_000, 8_000, 1e5, comm_us=30_000, cpu_during_radio="running")
    sleep = node_energy(p, 1e6, 64e6, 2_000, 8_000, 1e5, comm_us=30_000, cpu_during_radio="sleeping")
    assert sleep.comm_cpu_uj.high < run.comm_cpu_uj.low and sleep.total_uj.central < run.total_uj.central
    assert sleep.radio_uj == run.radio_uj
    with pytest.raises(ValueError):
        node_energy(p, 1e6, 64e6, 0, 0, 1e5, cpu_during_radio="dozing")


def test_boards_without_power_figures_say_what_to_add():
    with pytest.raises(UserError, match=r"board 'sim' has no \[power\] section.*boards/sim/board.toml"):
        load_power("sim")
    b = load_board("nrf52840dk")
    facts = {k: v for k, v in b.facts.items() if k != "power"}
    with pytest.raises(UserError, match=r"no \[power\] section"):
        load_power(Board(b.name, b.path, facts))
    partial = dict(b.facts, power={"voltage_v": 3.0, "regulator": "dcdc", "idle_ua": 2.0,
                                   "dcdc": {"radio_tx_8dbm_ma": 16.4, "radio_rx_2m_ma": 7.0}})
    with pytest.raises(UserError, match="cpu_active_ma"):
        load_power(Board(b.name, b.path, partial))
    with pytest.raises(UserError, match="4 dBm"):
        load_power("nrf52840dk").tx_ma(4)
    with pytest.raises(UserError, match="regulator"):
        load_power("nrf52840dk", regulator="buck")

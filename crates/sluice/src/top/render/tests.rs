use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::super::frame::{
    AgentRow, AgentTenantRow, GatewayRow, HeldBack, Lag, TenantAtGateway, TenantRow,
};
use super::*;

const MIB: f64 = 1024.0 * 1024.0;

fn sample_frame() -> Frame {
    let at = |g: &str, b: f64| TenantAtGateway {
        gateway: g.into(),
        bytes_per_second: b,
        ..TenantAtGateway::default()
    };
    Frame {
        interval_seconds: 1.0,
        tier_capacity_bps: Some(64.0 * MIB),
        tier_bytes_per_second: 48.0 * MIB,
        tenants: vec![
            TenantRow {
                tenant: "alice".into(),
                bytes_per_second: 16.0 * MIB,
                ops_per_second: 4.0,
                weight: Some(1.0),
                limit_bps: Some(16.0 * MIB),
                queued: 2,
                held_back: Some(HeldBack::AtLimit),
                gateways: vec![at("127.0.0.1:9100", 16.0 * MIB)],
                lag: Some(Lag {
                    pending_bytes: 3 * 1024 * 1024,
                    oldest_pending_age_seconds: Some(1.5),
                    ..Lag::default()
                }),
                ..TenantRow::default()
            },
            TenantRow {
                tenant: "bob".into(),
                bytes_per_second: 32.0 * MIB,
                weight: Some(3.0),
                gateways: vec![
                    at("127.0.0.1:9100", 8.0 * MIB),
                    at("127.0.0.1:9200", 24.0 * MIB),
                ],
                ..TenantRow::default()
            },
        ],
        gateways: vec![
            GatewayRow {
                control: "127.0.0.1:9100".into(),
                coordinator: true,
                capacity_bps: Some(24.0 * MIB),
                bytes_per_second: 24.0 * MIB,
                ..GatewayRow::default()
            },
            GatewayRow {
                control: "127.0.0.1:9200".into(),
                error: Some("Connection refused".into()),
                ..GatewayRow::default()
            },
        ],
        agents: vec![AgentRow {
            status: "127.0.0.1:9300".into(),
            error: None,
            tenants: vec![AgentTenantRow {
                tenant: "alice".into(),
                pending_bytes: 3 * 1024 * 1024,
                oldest_pending_age_seconds: Some(1.5),
                ..AgentTenantRow::default()
            }],
        }],
    }
}

fn row_of<'a>(lines: &'a [String], tenant: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.trim_start_matches('│').trim_start().starts_with(tenant))
        .map_or("", String::as_str)
}

#[test]
fn a_frame_draws_each_tenant_with_its_rate_limit_reason_split_and_lag() {
    let f = sample_frame();
    let mut terminal = Terminal::new(TestBackend::new(160, 40)).expect("test backend");
    terminal
        .draw(|fr| draw(&f, "q quits", fr.area(), fr.buffer_mut()))
        .expect("draw");
    let lines = lines(terminal.backend().buffer());
    assert!(
        lines[0].contains("2 gateway(s), 1 agent(s), 2 tenant(s)"),
        "{}",
        lines[0]
    );
    assert!(
        lines[0].contains("tier 48.0MiB/s of 64.0MiB/s (75%)"),
        "{}",
        lines[0]
    );
    let alice = row_of(&lines, "alice");
    for want in ["16.0MiB/s", "4.0", "at its limit", "g1 100%", "3.0MiB 1.5s"] {
        assert!(alice.contains(want), "{want:?} not in {alice:?}");
    }
    let bob = row_of(&lines, "bob");
    assert!(
        bob.contains("32.0MiB/s") && bob.contains("g1 25% g2 75%"),
        "{bob:?}"
    );
    let all = lines.join("\n");
    assert!(all.contains("coordinator"), "{all}");
    assert!(all.contains("unreachable: Connection refused"), "{all}");
    assert!(all.contains("127.0.0.1:9300"), "{all}");
    assert!(lines.iter().any(|l| l.contains("q quits")), "{all}");
}

#[test]
fn the_text_form_is_as_tall_as_the_frame_needs_and_keeps_every_row() {
    let f = sample_frame();
    let text = text(&f, 160);
    // Header, 2 tenants + 3, 2 gateways + 3, 1 agent row + 3; the empty hint line trimmed.
    assert_eq!(text.lines().count(), usize::from(height(&f)) - 1, "{text}");
    assert!(text.lines().all(|l| l.chars().count() <= 160));
    assert!(
        row_of(&text.lines().map(str::to_owned).collect::<Vec<_>>(), "bob").contains("32.0MiB/s")
    );
    let empty = text_of_empty();
    assert!(empty.contains("0 tenant(s)"), "{empty}");
}

fn text_of_empty() -> String {
    text(&Frame::default(), 100)
}

#[test]
fn rates_are_written_in_binary_units() {
    assert_eq!(bps(0.0), "0B/s");
    assert_eq!(bps(512.0), "512B/s");
    assert_eq!(bps(1536.0), "1.5KiB/s");
    assert_eq!(bps(48.0 * MIB), "48.0MiB/s");
}

//! `weft --help` with the daemons apart from the client commands (kubectl-like commands
//! first; the node agent, controller and installers that run as services after them).

use clap::CommandFactory;

/// Subcommands that run as daemons or node setup rather than as a user's client commands.
pub const DAEMONS: [&str; 4] = ["agent", "controller", "install-cni", "agent-ready"];

/// The `weft` command: [`super::Cli`] with [`DAEMONS`] listed under their own heading.
pub fn command() -> clap::Command {
    let mut command = super::Cli::command();
    let mut daemon_lines = Vec::new();
    for name in DAEMONS {
        let mut about = String::new();
        command = command.mut_subcommand(name, |sub| {
            about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            sub.hide(true)
        });
        // The first sentence, as clap's own list shows a doc comment's first line.
        let first = about.split_once(". ").map(|(s, _)| s).unwrap_or(&about);
        daemon_lines.push((name, first.trim_end_matches('.').to_string()));
    }
    let width = daemon_lines.iter().map(|(n, _)| n.len()).max().unwrap_or(0);
    let daemons: String = daemon_lines
        .iter()
        .map(|(name, about)| format!("  {name:<width$}  {about}\n"))
        .collect();
    command.help_template(format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n\
         Commands:\n{{subcommands}}\n\n\
         Daemons (run by `weft up`, a DaemonSet or a Deployment; `weft help DAEMON`):\n{daemons}\n\
         Options:\n{{options}}{{after-help}}"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn daemons_are_listed_apart() {
        let help = super::command().render_help().to_string();
        let (clients, daemons) = help.split_once("Daemons").expect("a Daemons heading");
        for client in [
            "  apply",
            "  get",
            "  describe",
            "  explain",
            "  delete",
            "  ipam",
        ] {
            assert!(clients.contains(client), "{client} among the commands:\n{help}");
        }
        for daemon in super::DAEMONS {
            assert!(
                !clients.contains(&format!("  {daemon} ")),
                "{daemon} not among the commands:\n{help}"
            );
            assert!(
                daemons.contains(&format!("  {daemon} ")),
                "{daemon} under Daemons:\n{help}"
            );
        }
        assert!(!help.contains("supervise"), "{help}");
    }
}

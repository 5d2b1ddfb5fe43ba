import CBuildInfo
import Foundation

/// What was built: `gateway_build_info{version,commit,swift} 1`, the Prometheus convention for joining
/// a version onto other series. The commit is baked in by scripts/release-build.sh; other builds say "unknown".
enum BuildInfo {
    static let version = "0.1.0"
    static let commit = String(cString: gateway_build_commit())
    /// The compiler's version, as far as `#if compiler` can tell.
    static let swift: String = {
        #if compiler(>=6.5)
        return "6.5+"
        #elseif compiler(>=6.4)
        return "6.4"
        #elseif compiler(>=6.3)
        return "6.3"
        #elseif compiler(>=6.2)
        return "6.2"
        #elseif compiler(>=6.1)
        return "6.1"
        #else
        return "6.0"
        #endif
    }()

    static var exposition: String {
        "# HELP gateway_build_info The gateway's version, git commit and Swift compiler; always 1.\n# TYPE gateway_build_info gauge\n"
            + "gateway_build_info\(Metrics.render(["version": version, "commit": commit, "swift": swift])) 1\n"
    }
}

/// The standard `process_*` metrics, read from /proc at scrape time as the Prometheus client libraries do.
enum ProcessMetrics {
    static var exposition: String {
        var output = ""
        func add(_ name: String, _ type: String, _ help: String, _ value: Double?) {
            guard let value else { return }
            output += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n\(name) \(value == value.rounded() ? String(Int64(value)) : String(value))\n"
        }
        let stat = readStat()
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        let page = Double(sysconf(Int32(_SC_PAGESIZE)))
        add("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
            stat.map { Double($0.utime + $0.stime) / ticks })
        add("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.", stat.map { Double($0.rss) * page })
        add("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", stat.map { Double($0.vsize) })
        add("process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
            stat.flatMap { stat in bootTime().map { $0 + Double(stat.starttime) / ticks } })
        add("process_open_fds", "gauge", "Number of open file descriptors.", openDescriptors().map(Double.init))
        var limit = rlimit()
        add("process_max_fds", "gauge", "Maximum number of open file descriptors.",
            getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 ? Double(limit.rlim_cur) : nil)
        return output
    }

    struct Stat {
        let utime: UInt64
        let stime: UInt64
        let starttime: UInt64
        let vsize: UInt64
        let rss: UInt64
    }

    /// /proc/self/stat (proc(5)): fields after the parenthesised command name, which may hold spaces.
    static func readStat() -> Stat? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ").map { UInt64($0) }
        // fields[0] is field 3 (state); utime is field 14, stime 15, starttime 22, vsize 23, rss 24.
        guard fields.count > 21, let utime = fields[11], let stime = fields[12], let start = fields[19],
              let vsize = fields[20], let rss = fields[21] else { return nil }
        return Stat(utime: utime, stime: stime, starttime: start, vsize: vsize, rss: rss)
    }

    /// `btime` of /proc/stat: boot time in seconds since the epoch (process start times count from it).
    static func bootTime() -> Double? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6))
        }
        return nil
    }

    static func openDescriptors() -> Int? {
        guard let directory = opendir("/proc/self/fd") else { return nil }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { $0.prefix { $0 != 0 } }
            if !name.elementsEqual(".".utf8), !name.elementsEqual("..".utf8) { count += 1 }
        }
        return count - 1  // the directory stream's own descriptor
    }
}

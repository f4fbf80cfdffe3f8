//! `strftime_now(fmt)`: the C locale's `strftime` on a UTC time, without a date crate.
//!
//! transformers formats `datetime.now()` (local time); molla uses UTC so a server's
//! prompts do not depend on the host's time zone.

const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// A broken-down UTC time.
struct Tm {
    year: i64,
    month: u32, // 1..=12
    day: u32,   // 1..=31
    yday: u32,  // 1..=366
    wday: u32,  // 0 = Sunday
    hour: u32,
    min: u32,
    sec: u32,
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

/// Days since 1970-01-01 to a civil date (Howard Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn breakdown(unix: i64) -> Tm {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400) as u32;
    let (year, month, day) = civil_from_days(days);
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = CUM[month as usize - 1] + day + u32::from(month > 2 && is_leap(year));
    Tm {
        year,
        month,
        day,
        yday,
        wday: (days + 4).rem_euclid(7) as u32,
        hour: secs / 3600,
        min: secs / 60 % 60,
        sec: secs % 60,
    }
}

/// Formats `unix` (seconds since the epoch, UTC) like C's `strftime` in the C locale.
/// Supported: `%a %A %b %h %B %c %C %d %D %e %F %H %I %j %m %M %n %p %R %S %t %T %u %w
/// %x %X %y %Y %z %Z %%`, with glibc's `-` flag (no padding, e.g. `%-d`); anything
/// else is copied as written, as glibc does.
pub fn format(fmt: &str, unix: i64) -> String {
    let tm = breakdown(unix);
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let no_pad = chars.peek() == Some(&'-');
        if no_pad {
            chars.next();
        }
        let num = |out: &mut String, v: i64, width: usize| {
            if no_pad {
                out.push_str(&v.to_string());
            } else {
                out.push_str(&format!("{v:0width$}"));
            }
        };
        let hour12 = if tm.hour.is_multiple_of(12) {
            12
        } else {
            tm.hour % 12
        };
        match chars.next() {
            Some('a') => out.push_str(&DAYS[tm.wday as usize][..3]),
            Some('A') => out.push_str(DAYS[tm.wday as usize]),
            Some('b' | 'h') => out.push_str(&MONTHS[tm.month as usize - 1][..3]),
            Some('B') => out.push_str(MONTHS[tm.month as usize - 1]),
            Some('c') => out.push_str(&format("%a %b %e %H:%M:%S %Y", unix)),
            Some('C') => num(&mut out, tm.year.div_euclid(100), 2),
            Some('d') => num(&mut out, tm.day.into(), 2),
            Some('D' | 'x') => out.push_str(&format("%m/%d/%y", unix)),
            Some('e') if no_pad => num(&mut out, tm.day.into(), 1),
            Some('e') => out.push_str(&format!("{:2}", tm.day)),
            Some('F') => out.push_str(&format("%Y-%m-%d", unix)),
            Some('H') => num(&mut out, tm.hour.into(), 2),
            Some('I') => num(&mut out, hour12.into(), 2),
            Some('j') => num(&mut out, tm.yday.into(), 3),
            Some('m') => num(&mut out, tm.month.into(), 2),
            Some('M') => num(&mut out, tm.min.into(), 2),
            Some('n') => out.push('\n'),
            Some('p') => out.push_str(if tm.hour < 12 { "AM" } else { "PM" }),
            Some('R') => out.push_str(&format("%H:%M", unix)),
            Some('S') => num(&mut out, tm.sec.into(), 2),
            Some('t') => out.push('\t'),
            Some('T' | 'X') => out.push_str(&format("%H:%M:%S", unix)),
            Some('u') => out.push_str(&(if tm.wday == 0 { 7 } else { tm.wday }).to_string()),
            Some('w') => out.push_str(&tm.wday.to_string()),
            Some('y') => num(&mut out, tm.year.rem_euclid(100), 2),
            Some('Y') => out.push_str(&tm.year.to_string()),
            Some('z') => out.push_str("+0000"),
            Some('Z') => out.push_str("UTC"),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if no_pad {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Seconds since the Unix epoch now (0 if the clock is before 1970).
pub fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert_eq!(
            format("%Y-%m-%d %H:%M:%S %a %j", 0),
            "1970-01-01 00:00:00 Thu 001"
        );
        // 2000-02-29 is a leap day; 2100 is not a leap year
        assert_eq!(format("%F %A %j", 951_782_400), "2000-02-29 Tuesday 060");
        assert_eq!(format("%F %j", 4_107_542_400), "2100-03-01 060");
        assert_eq!(format("%d %b %Y", -86_400), "31 Dec 1969");
        assert_eq!(format("%-d/%-m %e|%q|%", 1_753_535_096), "26/7 26|%q|%");
    }
}
